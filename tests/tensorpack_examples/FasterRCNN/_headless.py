"""Run a script of the FasterRCNN port on a machine without a display (a test harness, not part
of the port): ``python _headless.py SCRIPT [ARGS...]``.

predict.py's ``--predict`` shows its result with ``kerastrainer.utils.viz.interactive_imshow``
(tensorpack's: an OpenCV window that waits for a key), after writing it to ``output.png``.
OpenCV without a GUI backend (opencv-python-headless, CI) raises there, in tensorpack too. Here
that function is replaced, before SCRIPT runs, by one that writes each image it is given to
``$FRCNN_IMSHOW_DIR/imshow-<k>.png`` (when the variable is set) and returns, as a key press would.
SCRIPT then runs as ``__main__`` with its own directory first on ``sys.path``, as
``python SCRIPT`` would run it.
"""
import os
import runpy
import sys


def _headless_imshow():
    import cv2
    import kerastrainer.utils.viz as viz

    shown = []

    def interactive_imshow(img, lclick_cb=None, **kwargs):
        d = os.environ.get("FRCNN_IMSHOW_DIR")
        if d:
            os.makedirs(d, exist_ok=True)
            cv2.imwrite(os.path.join(d, "imshow-{}.png".format(len(shown))), img)
        shown.append(img.shape)

    viz.interactive_imshow = interactive_imshow


if __name__ == "__main__":
    script = os.path.abspath(sys.argv[1])
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(script))
    _headless_imshow()
    runpy.run_path(script, run_name="__main__")
