"""keras-io's "Knowledge Distillation": a ``Distiller`` Model subclass with its own ``compile``,
``train_step`` and ``test_step``; the teacher is trained with ``fit`` first.

Origin: https://github.com/keras-team/keras-io/blob/master/examples/vision/knowledge_distillation.py
(Kenneth Borup, created 2020/09/01; the version with ``train_step``, before the Keras 3 rewrite to
``compute_loss``). Its ``__init__`` assigns ``self.teacher = student`` and ``self.student = teacher``
as published; the test keeps it (the names swap, the program runs alike on both routes).

Edits, each marked ``# EDIT``:
- the adoption: ``teacher.fit``, ``distiller.fit`` and ``student_scratch.fit`` ->
  ``KerasModel(...).fit`` with the same arguments, and ``evaluate`` through the same runner;
- Keras 3 has no ``compiled_metrics``: the metrics are updated as keras-io's Keras 3 guide
  "Customizing what happens in fit()" does (each metric of ``self.metrics`` but the loss tracker
  gets ``update_state(y, y_pred)``); ``import keras`` for ``tensorflow.keras``,
  ``negative_slope`` for LeakyReLU's ``alpha``;
- for the test: 64 training and 32 test images (``fake_digits``) instead of the MNIST download, the
  teacher's filters 256 and 512 -> 16 and 32, the student's 16 and 32 -> 4 and 8 (CPU time),
  batch 16 and 1 epoch each, ``shuffle=False`` and ``verbose=0``, a seed and ``clear_session``;
  a function returning what the test compares.
"""
import keras
import numpy as np
import tensorflow as tf
from keras import layers

from kerastrainer.keras import KerasModel  # EDIT

from keras_programs.fake_mnist import fake_digits  # EDIT


class Distiller(keras.Model):
    def __init__(self, student, teacher):
        super(Distiller, self).__init__()
        self.teacher = student
        self.student = teacher

    def compile(
        self,
        optimizer,
        metrics,
        student_loss_fn,
        distillation_loss_fn,
        alpha=0.1,
        temperature=3,
    ):
        super(Distiller, self).compile(optimizer=optimizer, metrics=metrics)
        self.student_loss_fn = student_loss_fn
        self.distillation_loss_fn = distillation_loss_fn
        self.alpha = alpha
        self.temperature = temperature

    def _update_metrics(self, y, y_pred):  # EDIT: Keras 3 has no compiled_metrics
        for metric in self.metrics:
            if metric.name != "loss":
                metric.update_state(y, y_pred)

    def train_step(self, data):
        # Unpack data
        x, y = data

        # Forward pass of teacher
        teacher_predictions = self.teacher(x, training=False)

        with tf.GradientTape() as tape:
            # Forward pass of student
            student_predictions = self.student(x, training=True)

            # Compute losses
            student_loss = self.student_loss_fn(y, student_predictions)
            distillation_loss = self.distillation_loss_fn(
                tf.nn.softmax(teacher_predictions / self.temperature, axis=1),
                tf.nn.softmax(student_predictions / self.temperature, axis=1),
            )
            loss = self.alpha * student_loss + (1 - self.alpha) * distillation_loss

        # Compute gradients
        trainable_vars = self.student.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply_gradients(zip(gradients, trainable_vars))

        # Update the metrics configured in `compile()`.
        self._update_metrics(y, student_predictions)  # EDIT: self.compiled_metrics.update_state(...)

        # Return a dict of performance
        results = {m.name: m.result() for m in self.metrics if m.name != "loss"}  # EDIT: Keras 3's tracker
        results.update({"student_loss": student_loss, "distillation_loss": distillation_loss})
        return results

    def test_step(self, data):
        # Unpack the data
        x, y = data

        # Compute predictions
        y_prediction = self.student(x, training=False)

        # Calculate the loss
        student_loss = self.student_loss_fn(y, y_prediction)

        # Update the metrics.
        self._update_metrics(y, y_prediction)  # EDIT

        # Return a dict of performance
        results = {m.name: m.result() for m in self.metrics if m.name != "loss"}  # EDIT
        results.update({"student_loss": student_loss})
        return results

    def call(self, x):  # EDIT: Keras 3 builds and traces a subclassed model through call
        return self.student(x)


def program(use_kerastrainer: bool):  # EDIT: a function
    keras.backend.clear_session()  # EDIT
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs
    adopt = (lambda m: KerasModel(m)) if use_kerastrainer else (lambda m: m)  # EDIT: the adoption
    # Create the teacher
    teacher = keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            layers.Conv2D(16, (3, 3), strides=(2, 2), padding="same"),  # EDIT: 256
            layers.LeakyReLU(negative_slope=0.2),  # EDIT: alpha
            layers.MaxPooling2D(pool_size=(2, 2), strides=(1, 1), padding="same"),
            layers.Conv2D(32, (3, 3), strides=(2, 2), padding="same"),  # EDIT: 512
            layers.Flatten(),
            layers.Dense(10),
        ],
        name="teacher",
    )

    # Create the student
    student = keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            layers.Conv2D(4, (3, 3), strides=(2, 2), padding="same"),  # EDIT: 16
            layers.LeakyReLU(negative_slope=0.2),  # EDIT: alpha
            layers.MaxPooling2D(pool_size=(2, 2), strides=(1, 1), padding="same"),
            layers.Conv2D(8, (3, 3), strides=(2, 2), padding="same"),  # EDIT: 32
            layers.Flatten(),
            layers.Dense(10),
        ],
        name="student",
    )

    # Clone student for later comparison
    student_scratch = keras.models.clone_model(student)

    # Prepare the train and test dataset.
    batch_size = 16  # EDIT: 64
    (x_train, y_train), (x_test, y_test) = fake_digits(64, 1), fake_digits(32, 2)  # EDIT

    # Normalize data
    x_train = x_train.astype("float32") / 255.0
    x_train = np.reshape(x_train, (-1, 28, 28, 1))

    x_test = x_test.astype("float32") / 255.0
    x_test = np.reshape(x_test, (-1, 28, 28, 1))

    initial = [w.numpy() for w in teacher.weights + student.weights + student_scratch.weights]  # EDIT
    quiet = dict(batch_size=batch_size, shuffle=False, verbose=0)  # EDIT: batch_size, shuffle, verbose

    # Train teacher as usual
    teacher.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )

    # Train and evaluate teacher on data.
    runner = adopt(teacher)  # EDIT
    h_teacher = runner.fit(x_train, y_train, epochs=1, **quiet)  # EDIT: 5 epochs
    s_teacher = runner.evaluate(x_test, y_test, verbose=0)  # EDIT: verbose

    # Initialize and compile distiller
    distiller = Distiller(student=student, teacher=teacher)
    distiller.compile(
        optimizer=keras.optimizers.Adam(),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
        student_loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        distillation_loss_fn=keras.losses.KLDivergence(),
        alpha=0.1,
        temperature=10,
    )

    # Distill teacher to student
    runner = adopt(distiller)  # EDIT
    h_distiller = runner.fit(x_train, y_train, epochs=1, **quiet)  # EDIT: 3 epochs

    # Evaluate student on test dataset
    s_distiller = runner.evaluate(x_test, y_test, verbose=0)  # EDIT: verbose

    # Train student as doen usually
    student_scratch.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )

    # Train and evaluate student trained from scratch.
    runner = adopt(student_scratch)  # EDIT
    h_scratch = runner.fit(x_train, y_train, epochs=1, **quiet)  # EDIT: 3 epochs
    s_scratch = runner.evaluate(x_test, y_test, verbose=0)  # EDIT: verbose
    return dict(models=(teacher, student, student_scratch), initial=initial,
                histories=(h_teacher.history, h_distiller.history, h_scratch.history),
                scores=(s_teacher, s_distiller, s_scratch))
