"""The keras#2436 `ModelMGPU` wrapper around Keras 2's `multi_gpu_model`, as users wrote it.

Origin: the class posted in keras-team/keras issue #2436 (and keras_experiments'
`ModelKerasMGPU`): copy the parallel model's `__dict__`, route `load`/`save` to the serial
model. The usage around it (build, wrap, compile, fit, save) is the common one. Test client.
Edits:
  1. `from keras.utils import multi_gpu_model` -> `from kerastrainer.keras import multi_gpu_model`.
  2. `fit(..., shuffle=False)` and small random data made here, so that the test can compare
     the numbers with single-device `keras.Model.fit`; `batch_size=93` on 2 devices splits
     47/46 (uneven).
"""
import numpy as np

import keras
from keras.models import Model
from kerastrainer.keras import multi_gpu_model  # edit 1


class ModelMGPU(Model):
    def __init__(self, ser_model, gpus):
        pmodel = multi_gpu_model(ser_model, gpus)
        self.__dict__.update(pmodel.__dict__)
        self._smodel = ser_model

    def __getattribute__(self, attrname):
        '''Override load and save methods to be used from the serial-model. The
        serial-model holds references to the weights in the multi-gpu model.
        '''
        # return Model.__getattribute__(self, attrname)
        if 'load' in attrname or 'save' in attrname:
            return getattr(self._smodel, attrname)

        return super(ModelMGPU, self).__getattribute__(attrname)


def make_serial_model():
    return keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation='relu'),
                             keras.layers.Dense(1, activation='sigmoid')])


def get_data():  # edit 2
    rng = np.random.RandomState(0)
    x = rng.rand(93 * 4, 20).astype('float32')
    y = (x.sum(1) > 10).astype('float32')
    return x, y


def main(gpus=2, path='model_mgpu.keras'):
    x, y = get_data()
    serial_model = make_serial_model()
    model = ModelMGPU(serial_model, gpus)
    model.compile(loss='binary_crossentropy', optimizer=keras.optimizers.SGD(0.1), metrics=['accuracy'])
    history = model.fit(x, y, batch_size=93, epochs=2, shuffle=False)  # edit 2
    model.save(path)  # the serial model's save
    model.save_weights(path.replace('.keras', '.weights.h5'))
    return model, serial_model, history


if __name__ == '__main__':
    main()
