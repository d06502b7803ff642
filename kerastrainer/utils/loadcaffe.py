"""tensorpack's ``utils.loadcaffe``: Caffe model import. Not supported; these raise."""
from .tf1_only import tf1_only_function

__all__ = ["load_caffe", "get_caffe_pb"]

_WHY = "Caffe model import is not supported (it needs Caffe's protobuf and a TF1 graph)"
_INSTEAD = ("Convert the .caffemodel once to a {name: array} .npz (e.g. with caffe's Python "
            "module or a converter such as caffe2keras), then load it with SmartInit('params.npz').")

load_caffe = tf1_only_function("load_caffe", __name__, _WHY, _INSTEAD)
get_caffe_pb = tf1_only_function("get_caffe_pb", __name__, _WHY, _INSTEAD)
