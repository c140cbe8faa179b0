# robot_rl on a fresh Debian/Ubuntu machine without ROS: `make train` (simulated training), `make test`.
# ROS 2 users: see README ("ROS 2 users") for colcon.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# xvfb: a virtual display for the test of MuJoCo's viewer window
DEB_PACKAGES := libosmesa6 libusb-1.0-0 xvfb
ROS_WHEELS := ros-rclpy ros-std-msgs ros-sensor-msgs ros-geometry-msgs ros-nav-msgs ros-std-srvs \
              ros-diagnostic-msgs ros-trajectory-msgs ros-lifecycle-msgs ros-rmw-fastrtps-cpp
# Headless MuJoCo rendering on CPU; DDS stays on this machine.
export MUJOCO_GL ?= osmesa
export PYOPENGL_PLATFORM ?= osmesa
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
export ROS_LOCALHOST_ONLY ?= 1

# gym-hil (HIL-SERL's Panda scenes) pins MuJoCo below 3.9 and the test extra's mujoco-warp needs 3.13 or later:
# it lives in a venv of its own, beside the stack, with only what its tests need.
GYM_HIL_VENV ?= .venv-gym-hil
GYM_HIL_PY := $(GYM_HIL_VENV)/bin/python
GYM_HIL_TESTS := tests/test_gym_hil.py

.PHONY: setup train test benchmarks clean debian-packages gym-hil-env test-gym-hil gpu-wheels gpu-dry-run \
        peer-lerobot
setup: $(VENV)/.installed

debian-packages:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# $(call install_venv,VENV,PACKAGES): VENV with torch first and pinned (an unpinned torch pulls gigabytes of CUDA
# packages), the ROS wheels, then PACKAGES; `pip check` refuses pins that contradict each other.
define install_venv
	test -x $(1)/bin/python || python3 -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q torch==2.13.0
	$(1)/bin/python -m pip install -q $(ROS_WHEELS)
	$(1)/bin/python -m pip install -q $(2)
	$(1)/bin/python -m pip check
	touch $(1)/.installed
endef

$(VENV)/.installed: setup.py package.xml | debian-packages
	$(call install_venv,$(VENV),-e '.[test]')

train: setup
	$(VENV)/bin/robot-rl train $(ARGS)

# The tests run in TEST_WORKERS processes at once (pytest-xdist; a module's tests stay together, so its fixtures are
# built once; each worker draws ROS domains of its own, robot_rl/ros/probe.py), each process's torch and OpenMP kept
# to one thread (two workers with two threads each on 2 cores stalled each other: one training fixture took 177 s
# instead of 19). Then the tests marked wall_clock run alone: they time a person or a node closely enough that the
# other worker's load failed them (a recorded person handed back mid-episode, a keyboard person's corrections that
# never arrived, the arm's stale-command hold). On this 2-core machine: about 15-16 minutes (14.3 and 1.3 in a
# fresh clone's CI, 2026-12-01; 14.8 and 1.2 on 2026-11-30), against 24-25 in one process.
# TEST_WORKERS=0: everything in this one process.
TEST_WORKERS ?= 2
test: setup
	$(if $(filter-out 0,$(TEST_WORKERS)),OMP_NUM_THREADS=1) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope \
	  --no-loadscope-reorder -m "not wall_clock" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest -q -m wall_clock $(PYTEST_ARGS) || [ $$? -eq 5 ]

gym-hil-env: $(GYM_HIL_VENV)/.installed

# The package with gym-hil and the test runner only (not the test extra: its mujoco-warp needs a newer MuJoCo).
$(GYM_HIL_VENV)/.installed: setup.py package.xml | debian-packages
	$(call install_venv,$(GYM_HIL_VENV),-e '.[gym-hil]' pytest pytest-timeout)

# The gym_hil-marked tests, in the venv that holds gym-hil (in .venv they skip).
test-gym-hil: gym-hil-env
	$(GYM_HIL_PY) -m pytest -q -m gym_hil $(PYTEST_ARGS) $(GYM_HIL_TESTS)

# The peer of issue 40, LeRobot's HIL-SERL with gym-hil, as its users install it (lerobot[hilserl], which pins a
# torch below 2.11: PyPI's CUDA build), in a venv of its own; requirements/peer-lerobot.txt says how it was pinned.
# The venv takes 9 GB and pip unpacks about 4 GB more while installing, so it checks the free space first.
PEER_LEROBOT_VENV ?= .venv-peer-lerobot
PEER_LEROBOT_GB := 14
peer-lerobot: $(PEER_LEROBOT_VENV)/.installed

# LeRobot's install guide asks for ffmpeg: torchcodec, its video decoder, loads FFmpeg's shared libraries.
$(PEER_LEROBOT_VENV)/.installed: DEB_PACKAGES += ffmpeg

$(PEER_LEROBOT_VENV)/.installed: requirements/peer-lerobot.txt | debian-packages
	@for dir in $(dir $(abspath $(PEER_LEROBOT_VENV))) "$${TMPDIR:-/tmp}"; do \
	  free=$$(df -Pk "$$dir" | awk 'NR == 2 {print int($$4 / 1048576)}'); \
	  if [ "$$free" -lt $(PEER_LEROBOT_GB) ]; then \
	    echo "make peer-lerobot needs $(PEER_LEROBOT_GB) GB free for LeRobot's venv; $$dir has $$free GB"; \
	    exit 1; \
	  fi; \
	done
	test -x $(PEER_LEROBOT_VENV)/bin/python || python3 -m venv $(PEER_LEROBOT_VENV)
	$(PEER_LEROBOT_VENV)/bin/python -m pip install -q --upgrade pip
	$(PEER_LEROBOT_VENV)/bin/python -m pip install -q -r requirements/peer-lerobot.txt
	$(PEER_LEROBOT_VENV)/bin/python -m pip check
	touch $@

benchmarks: setup gym-hil-env
	# Every benchmark's --quick run, each in a scratch directory: quick runs record nothing here. The gym_hil_*
	# ones run in gym-hil's venv.
	for b in benchmarks/*.py; do \
	  py=$(abspath $(PY)); case $$b in benchmarks/gym_hil_*) py=$(abspath $(GYM_HIL_PY));; esac; \
	  if [ $$b = benchmarks/peer_lerobot.py ] && [ ! -x $(PEER_LEROBOT_VENV)/bin/python ]; then \
	    echo "skipping $$b: LeRobot's venv (14 GB) is not built; make peer-lerobot first"; continue; \
	  fi; \
	  (cd "$$(mktemp -d)" && $$py $(CURDIR)/$$b --quick) || exit 1; \
	done

# The wheels benchmarks/gpu_run.sh carries to the GPU machine (Python 3.12; benchmarks/gpu_wheels.txt says which
# and why), then its CPU dry run with tiny sizes: the same steps, so the script cannot rot between GPU runs.
gpu-wheels:
	mkdir -p .gpu-wheels
	$(PIP) download -q --no-deps --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
	  -d .gpu-wheels -r benchmarks/gpu_wheels.txt
	du -sh .gpu-wheels

gpu-dry-run: setup
	bash benchmarks/gpu_run.sh "$$(mktemp -d)" --dry-run

clean:
	rm -rf $(VENV) $(GYM_HIL_VENV) build *.egg-info
