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

.PHONY: setup train test benchmarks clean
setup: $(VENV)/.installed

$(VENV)/.installed: setup.py package.xml
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned: an unpinned torch pulls gigabytes of CUDA packages.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q $(ROS_WHEELS)
	$(PIP) install -q -e '.[test]'
	touch $@

train: setup
	$(VENV)/bin/robot-rl train $(ARGS)

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

benchmarks: setup
	# Every benchmark's --quick run, each in a scratch directory: quick runs record nothing here.
	for b in benchmarks/*.py; do (cd "$$(mktemp -d)" && $(abspath $(PY)) $(CURDIR)/$$b --quick) || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
