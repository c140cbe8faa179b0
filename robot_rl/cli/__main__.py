"""`python -m robot_rl.cli` (what the tests and `robot-rl` run)."""

from robot_rl.cli import main

raise SystemExit(main())
