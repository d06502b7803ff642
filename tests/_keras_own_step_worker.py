"""Worker of test_keras_own_step's multi-worker test (run by `kerastrainer-run -np 2`): KerasModel on
MultiWorkerTrainer trains a model whose class overrides train_step (keras-io's guide, program 1),
each worker on its shard of the global batches, and writes its final weights to argv[1]."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":
    from kerastrainer.train.multiworker import MultiWorkerTrainer
    trainer = MultiWorkerTrainer()   # first: before any TF op
    import keras
    from kerastrainer import KerasModel
    from test_keras_own_step import CustomModel1, _dense_model, _xy

    x, y = _xy()
    model = _dense_model(CustomModel1)
    km = KerasModel(model, trainer=trainer)
    km.compile(optimizer="adam", loss="mse", metrics=["mae"])
    km.fit(input=(x, y), epochs=2, batch_size=32, shuffle=False, callbacks=[], extra_callbacks=[], monitors=[])
    np.savez(os.path.join(sys.argv[1], f"final-{trainer.rank}.npz"), *[w.numpy() for w in model.weights])
    print("WORKER-DONE", trainer.rank, flush=True)
