"""Quadrotor vehicle links without ROS, one module per concern: `base` (the `QuadLink` interface
every link implements, its states, errors and the geofence), `mavlink` (PX4 / ArduPilot over
pymavlink), `crazyflie` (Crazyflie over cflib) and `config` (the checked hardware/<quad>.yaml
and the link it names). `robot_rl.nodes.quadrotor` drives a link through the interface only."""
