from proctor.station.drivers.camera.base import CAMERAS, Camera, CameraConfig, CameraStalled, Frame

__all__ = ["CAMERAS", "Camera", "CameraConfig", "CameraStalled", "Frame"]
