"""Camera sources for real robots, behind one small interface (no ROS in here), one module per
concern: `frames` (Frame, Intrinsics, the crop + resize Geometry), `base` (the CameraSource interface,
its errors, reconnect backoff and device clocks), `opencv` (webcams, /dev/videoN, video files) and
`realsense` (Intel RealSense).

    source = OpenCVSource("/dev/video0", geometry=Geometry(output_size=(128, 128)))
    source.open()                     # optional: read() opens (and reopens) by itself
    frame = source.read()             # Frame(color HxWx3 uint8 RGB, depth HxW uint16 | None, stamp_ns, seq)
    source.intrinsics                 # pinhole intrinsics of the *output* image (after crop + resize)
    source.close()

Every source crops and resizes to the policy's size itself (colour with ``cv2.INTER_AREA``, depth with
nearest neighbour so no depth values are invented at object edges) and keeps its intrinsics in step.

Self-healing: a source whose device fails (unplugged, USB reset, a `wait_for_frames` that times out)
closes it, raises `CameraError`, and the next `read()` reopens it after an exponential backoff
(`Backoff`); `reconnects` counts the successful reopenings. A device that is missing at start behaves
the same way, so a grab loop is simply::

    while running:
        try:
            frame = source.read()
        except CameraError as exc:   # reported, retried by the next read()
            ...
        except EndOfStream:          # a video file without loop
            break

`close()` may be called from another thread: waits (backoff, file pacing, RealSense polling) end
within ~0.1 s and `read()` then raises `SourceClosed`.
"""
