"""The person's view of a human-in-the-loop session: the cameras' images with the session status
burned in (`compose`), served to a browser as an MJPEG stream (`mjpeg`) and optionally recorded
(`recording`). No ROS here: the `session_view` node feeds it from topics."""
