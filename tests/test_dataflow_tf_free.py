"""kerastrainer.dataflow works without TensorFlow, and accepts any object with the DataFlow protocol."""
import os
import subprocess
import sys
import textwrap

import numpy as np

from kerastrainer.dataflow import (BatchData, ConcatData, DataFlow, JoinData, LMDBSerializer, MapData,
                                   MapDataComponent, RepeatedData)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_importing_the_package_leaves_tensorflow_out():
    proc = run_python("""
        import sys

        def tf_modules():
            return sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))

        import kerastrainer.dataflow
        from kerastrainer.dataflow import *
        assert not tf_modules(), 'import kerastrainer.dataflow loaded ' + ', '.join(tf_modules()[:5])
        import kerastrainer
        kerastrainer.DataFromList, kerastrainer.BatchData, kerastrainer.logger
        assert not tf_modules(), 'import kerastrainer loaded ' + ', '.join(tf_modules()[:5])
        print('OK')
    """)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_dataflows_run_where_tensorflow_cannot_be_imported(tmp_path):
    # sys.modules['tensorflow'] = None makes any import of TF raise, naming the importer in the traceback
    proc = run_python(f"""
        import sys
        sys.modules['tensorflow'] = None
        import numpy as np
        from kerastrainer.dataflow import (DataFromList, FakeData, BatchData, MapDataComponent,
                                           LocallyShuffleData, PrintData, LMDBSerializer, NumpySerializer)
        ds = FakeData([[4, 4], []], size=20, dtype=['float32', 'int32'], domain=(0, 10))
        ds = PrintData(BatchData(LocallyShuffleData(MapDataComponent(ds, lambda x: x * 2), 8), 5))
        ds.reset_state()
        assert [b[0].shape for b in ds] == [(5, 4, 4)] * 4
        path = {str(tmp_path / 'x.lmdb')!r}
        LMDBSerializer.save(DataFromList([[np.zeros(3), i] for i in range(4)], shuffle=False), path)
        back = LMDBSerializer.load(path, shuffle=False)
        back.reset_state()
        assert [dp[1] for dp in back] == [0, 1, 2, 3]
        NumpySerializer.save(DataFromList([[1]]), path + '.npz')
        print('OK')
    """)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]


class TensorpackStyle:
    """Has the protocol of a tensorpack DataFlow but does not subclass kerastrainer's."""

    def __init__(self, n):
        self.n = n
        self.reset_calls = 0

    def reset_state(self):
        self.reset_calls += 1

    def __iter__(self):
        for i in range(self.n):
            yield [np.full((2,), i, np.float32), i]

    def __len__(self):
        return self.n

    def get_data(self):
        return self.__iter__()

    def size(self):
        return self.__len__()


class SizeOnly(TensorpackStyle):
    """An older tensorpack DataFlow: size() but no __len__."""

    __len__ = None

    def size(self):
        return self.n


def test_duck_typed_dataflow_in_batch_and_map():
    src = TensorpackStyle(7)
    assert not isinstance(src, DataFlow)
    ds = BatchData(MapData(src, lambda dp: [dp[0] + 1, dp[1]]), 3, remainder=True)
    ds.reset_state()
    assert src.reset_calls == 1
    batches = list(ds)
    assert len(ds) == 3 and [b[0].shape for b in batches] == [(3, 2), (3, 2), (1, 2)]
    assert batches[0][0].dtype == np.float32 and batches[2][1].tolist() == [6]
    np.testing.assert_array_equal(batches[1][0][:, 0], [4, 5, 6])


def test_duck_typed_dataflow_in_other_combinators(tmp_path):
    comp = MapDataComponent(TensorpackStyle(3), lambda label: label * 10, index=1)
    comp.reset_state()
    assert [dp[1] for dp in comp] == [0, 10, 20]
    rep = RepeatedData(SizeOnly(2), 3)  # size() is used when __len__ is missing
    assert len(rep) == 6
    joined = JoinData([TensorpackStyle(2), ConcatData([TensorpackStyle(1), TensorpackStyle(1)])])
    joined.reset_state()
    assert [dp[1] for dp in joined] == [0, 1] and [dp[3] for dp in joined] == [0, 0]
    path = str(tmp_path / "tp.lmdb")
    LMDBSerializer.save(TensorpackStyle(4), path)
    back = LMDBSerializer.load(path, shuffle=False)
    back.reset_state()
    assert [dp[1] for dp in back] == [0, 1, 2, 3]
