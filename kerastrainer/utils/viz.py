"""Images for looking at data and samples (tensorpack's ``utils.viz``): grids
(``stack_patches``, ``gen_stack_patches``), a window (``interactive_imshow``), boxes
(``draw_boxes``), heat maps (``intensity_to_rgb``) and a DataFlow's images on disk
(``dump_dataflow_images``). numpy; OpenCV to draw and show, matplotlib for colour maps.

Example::

    grid = stack_patches(images, nr_row=10, nr_col=10)     # 100 HxWxC images -> one image
    cv2.imwrite('samples.png', grid)
"""
from __future__ import annotations

import os
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np

__all__ = ["stack_patches", "gen_stack_patches", "interactive_imshow", "draw_boxes", "intensity_to_rgb",
           "dump_dataflow_images"]


def _as_patches(patch_list) -> np.ndarray:
    arr = np.asarray(patch_list)
    if arr.ndim not in (3, 4):
        raise ValueError(f"stack_patches takes a list of HxW or HxWxC images; got an array of shape {arr.shape}.")
    return arr


def _canvas(arr: np.ndarray, nr_row: int, nr_col: int, border: int, bgcolor) -> np.ndarray:
    h, w = arr.shape[1:3]
    shape = [nr_row * h + (nr_row - 1) * border, nr_col * w + (nr_col - 1) * border] + list(arr.shape[3:])
    return np.full(shape, bgcolor, dtype=arr.dtype)


def _fill(canvas: np.ndarray, arr: np.ndarray, nr_col: int, border: int) -> np.ndarray:
    h, w = arr.shape[1:3]
    for k, patch in enumerate(arr):
        r, c = divmod(k, nr_col)
        canvas[r * (h + border): r * (h + border) + h, c * (w + border): c * (w + border) + w] = patch
    return canvas


def _default_border(arr: np.ndarray) -> int:
    return max(1, int(0.05 * min(arr.shape[1:3])))


def stack_patches(patch_list: Union[Sequence[np.ndarray], np.ndarray], nr_row: int, nr_col: int,
                  border: Optional[int] = None, pad: bool = False, bgcolor=255, viz: bool = False,
                  lclick_cb: Optional[Callable] = None) -> np.ndarray:
    """Put up to ``nr_row * nr_col`` same-sized images on one grid image, row by row.

    Args:
        patch_list: images (HxW or HxWxC), all of one size.
        border: pixels between images (default 5% of the image's smaller side, at least 1).
        pad: allow fewer images than grid cells (the rest stays ``bgcolor``); else the count
            must fill the grid exactly.
        bgcolor: the value of the border and empty cells.
        viz: also show the grid in a window (:func:`interactive_imshow`).
        lclick_cb: with ``viz``, called as ``lclick_cb(image, x, y)`` on a left click.
    """
    arr = _as_patches(patch_list)
    cells = nr_row * nr_col
    if len(arr) > cells or (not pad and len(arr) != cells):
        raise ValueError(f"stack_patches: {len(arr)} images for a {nr_row}x{nr_col} grid"
                         + ("" if pad else " (pass pad=True to leave cells empty)") + ".")
    border = _default_border(arr) if border is None else int(border)
    grid = _fill(_canvas(arr, nr_row, nr_col, border, bgcolor), arr, nr_col, border)
    if viz:
        interactive_imshow(grid, lclick_cb=lclick_cb)
    return grid


def gen_stack_patches(patch_list, nr_row: Optional[int] = None, nr_col: Optional[int] = None,
                      border: Optional[int] = None, max_width: int = 1000, max_height: int = 1000,
                      bgcolor=255, viz: bool = False, lclick_cb: Optional[Callable] = None) -> Iterator[np.ndarray]:
    """Yield grid images of the patches, ``nr_row x nr_col`` per grid (by default as many as fit in
    ``max_height x max_width``); the last grid may have empty cells."""
    arr = _as_patches(patch_list)
    border = _default_border(arr) if border is None else int(border)
    h, w = arr.shape[1:3]
    nr_row = nr_row or max(1, (max_height + border) // (h + border))
    nr_col = nr_col or max(1, (max_width + border) // (w + border))
    per = nr_row * nr_col
    for start in range(0, len(arr), per):
        yield stack_patches(arr[start:start + per], nr_row, nr_col, border=border, pad=True, bgcolor=bgcolor,
                            viz=viz, lclick_cb=lclick_cb)


def interactive_imshow(img: np.ndarray, lclick_cb: Optional[Callable] = None, **kwargs) -> None:
    """Show ``img`` in an OpenCV window until a key is pressed (``q``/Esc quits the process, as
    tensorpack's did). Needs a display: without one OpenCV's error is raised as it is."""
    import cv2
    name = "kerastrainer_viz"
    cv2.imshow(name, img)
    if lclick_cb is not None:
        def on_mouse(event, x, y, *args):
            if event == cv2.EVENT_LBUTTONUP:
                lclick_cb(img, x, y)
        cv2.setMouseCallback(name, on_mouse)
    key = cv2.waitKey(-1) & 0xFF
    cv2.destroyWindow(name)
    if key in (ord("q"), 27):
        raise SystemExit(0)


def draw_boxes(im: np.ndarray, boxes, labels: Optional[Sequence[str]] = None, color=None) -> np.ndarray:
    """A copy of ``im`` (HxW, HxWx1 or HxWx3, in [0, 255]) with ``boxes`` (N x 4: x1, y1, x2, y2)
    drawn, each with its label above it. ``color``: a BGR triple (green by default). The copy is
    uint8, as tensorpack's: a float image is cut to [0, 255] and truncated to integers first
    (OpenCV draws text on 8-bit images only).

    Example::

        out = draw_boxes(image, [[10, 10, 50, 40]], ['cat'])
    """
    import cv2
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if labels is not None and len(labels) != len(boxes):
        raise ValueError(f"draw_boxes: {len(labels)} labels for {len(boxes)} boxes.")
    if (boxes[:, 2] < boxes[:, 0]).any() or (boxes[:, 3] < boxes[:, 1]).any():
        raise ValueError("draw_boxes: every box is (x1, y1, x2, y2) with x2 >= x1 and y2 >= y1.")
    out = np.asarray(im)
    out = np.clip(out, 0, 255).astype(np.uint8) if out.dtype != np.uint8 else out.copy()
    if out.ndim == 3 and out.shape[2] == 1:
        out = out[:, :, 0]
    if out.ndim == 2:
        out = cv2.cvtColor(out, cv2.COLOR_GRAY2BGR)
    color = (0, 255, 0) if color is None else tuple(int(c) for c in color)
    for i, (x1, y1, x2, y2) in enumerate(np.round(boxes).astype(int)):
        cv2.rectangle(out, (x1, y1), (x2, y2), color, 1)
        if labels is not None:
            cv2.putText(out, str(labels[i]), (x1, max(y1 - 2, 10)), cv2.FONT_HERSHEY_SIMPLEX, 0.4, color, 1)
    return out


def intensity_to_rgb(intensity: np.ndarray, cmap: str = "cubehelix", normalize: bool = False) -> np.ndarray:
    """A 2-D array as an RGB image (HxWx3 float in [0, 255]) through the matplotlib colour map ``cmap``.
    ``normalize``: stretch the values to [0, 1] first (else they must be in [0, 1]).

    Example::

        heat = intensity_to_rgb(saliency, normalize=True)
    """
    import matplotlib.cm
    intensity = np.asarray(intensity, dtype=np.float64)
    if intensity.ndim != 2:
        raise ValueError(f"intensity_to_rgb takes a 2-D array; got shape {intensity.shape}.")
    if normalize:
        lo, hi = intensity.min(), intensity.max()
        intensity = (intensity - lo) / (hi - lo) if hi > lo else np.zeros_like(intensity)
    elif intensity.min() < 0 or intensity.max() > 1:
        raise ValueError("intensity_to_rgb: values outside [0, 1]; pass normalize=True to stretch them.")
    rgba = matplotlib.colormaps[cmap](intensity)
    return rgba[..., :3] * 255.0


def dump_dataflow_images(df, index: int = 0, batched: bool = True, number: int = 1000,
                         output_dir: Optional[str] = None, scale: float = 1, resize=None, viz=None,
                         flipRGB: bool = False) -> None:  # noqa: N803 (tensorpack's argument name)
    """Write (``output_dir``) or show as grids (``viz=(rows, cols)``) the images in component
    ``index`` of ``df``'s datapoints (``batched``: each component is a batch), up to ``number``.

    Example::

        dump_dataflow_images(df, index=0, batched=True, number=100, output_dir='/tmp/imgs')
    """
    import cv2
    if output_dir is None and viz is None:
        raise ValueError("dump_dataflow_images: give output_dir= (files) or viz=(rows, cols) (a window).")
    if output_dir:
        os.makedirs(output_dir, exist_ok=True)
    df.reset_state()
    count = 0
    shown = []

    def emit(img):
        nonlocal count
        img = np.asarray(img) * scale
        if resize is not None:
            img = cv2.resize(img, tuple(resize))
        if flipRGB:
            img = img[..., ::-1]
        if output_dir:
            cv2.imwrite(os.path.join(output_dir, f"{count}.jpg"), img)
        if viz is not None:
            shown.append(img)
            if len(shown) == viz[0] * viz[1]:
                interactive_imshow(stack_patches(shown, viz[0], viz[1]))
                shown.clear()
        count += 1

    for dp in df:
        imgs = dp[index] if batched else [dp[index]]
        for img in imgs:
            if count >= number:
                return
            emit(img)
