"""Robots as packages: each subpackage is one robot (its tasks, node kinds, evaluation and `robot-rl` recipes),
found by `robot_rl.robots.registry`; an installed package adds a robot through the entry-point group
`robot_rl.robots`. Generic code reads the registry and never imports a robot package."""
