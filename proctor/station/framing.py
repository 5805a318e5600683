"""A camera's framing against its commissioned reference image.

Commissioning stores one frame per camera (PNG, beside the commissioned-cell
file); pre-flight compares today's frame with it. The comparison is the
correlation of the two images reduced to small grey thumbnails, each
normalised to zero mean and unit variance: 1 for the same view, near 0 for an
unrelated one. Thumbnails make it blind to sensor noise, compression and a
few pixels of jitter; normalisation makes it blind to an overall change of
brightness (daylight, exposure). A camera that was turned, moved or swapped,
or a cell rebuilt around it, scores low. It is a sanity check of the view,
not a calibration: it cannot tell a few millimetres of shift.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

# small enough to ignore noise and jitter, large enough to see the cell's layout
THUMBNAIL = (64, 48)


def save_image(path: Path, image: np.ndarray) -> None:
    """An (H, W, 3) uint8 RGB frame as PNG (lossless: the reference stays exact)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8)).save(path, format="PNG")


def load_image(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))


def _thumbnail(image: np.ndarray) -> np.ndarray:
    grey = Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8)).convert("L")
    small = np.asarray(grey.resize(THUMBNAIL, Image.Resampling.BILINEAR), dtype=np.float64)
    centred = small - small.mean()
    spread = float(np.sqrt((centred**2).mean()))
    return centred / spread if spread > 1e-6 else centred


def image_similarity(reference: np.ndarray, image: np.ndarray) -> float:
    """Correlation of the normalised grey thumbnails, in [-1, 1]; images of
    different sizes are compared at the thumbnail size. A featureless image
    (uniform grey, a covered lens) scores 0."""
    a, b = _thumbnail(reference), _thumbnail(image)
    return float((a * b).mean())


__all__ = ["THUMBNAIL", "image_similarity", "load_image", "save_image"]
