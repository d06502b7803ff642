"""The usage example of Keras 2's `keras.utils.multi_gpu_model` docstring.

Ported from the docstring's example in Keras 2's keras/utils/multi_gpu_utils.py (test client).
Edits:
  1. `from keras.utils import multi_gpu_model` -> `from kerastrainer.keras import multi_gpu_model`
     (the migration rule; Keras 3 removed multi_gpu_model).
  2. Sizes for a CPU test: 24 samples of 71x71 (Xception's smallest input) and 10 classes
     instead of 1000 of 224x224 and 1000 classes; `gpus=3` instead of 8 (the logical
     devices the test makes); `epochs=1, batch_size=16` instead of 20 and 256 (16 splits
     6/5/5 over 3 devices, the last batch of 8 splits 2/3/3: uneven splits).
"""
import tensorflow as tf
from keras.applications import Xception
from kerastrainer.keras import multi_gpu_model  # edit 1
import numpy as np

num_samples = 24  # edit 2
height = 71
width = 71
num_classes = 10

# Instantiate the base model (or "template" model).
# We recommend doing this with under a CPU device scope,
# so that the model's weights are hosted on CPU memory.
# Otherwise they may end up hosted on a GPU, which would
# complicate weight sharing.
with tf.device('/cpu:0'):
    model = Xception(weights=None,
                     input_shape=(height, width, 3),
                     classes=num_classes)

# Replicates the model on 8 GPUs.
# This assumes that your machine has 8 available GPUs.
parallel_model = multi_gpu_model(model, gpus=3)  # edit 2
parallel_model.compile(loss='categorical_crossentropy',
                       optimizer='rmsprop')

# Generate dummy data.
x = np.random.random((num_samples, height, width, 3))
y = np.random.random((num_samples, num_classes))

# This `fit` call will be distributed on 8 GPUs.
# Since the batch size is 256, each GPU will process 32 samples.
parallel_model.fit(x, y, epochs=1, batch_size=16)  # edit 2

# Save model via the template model (which shares the same weights):
model.save('my_model.h5')
