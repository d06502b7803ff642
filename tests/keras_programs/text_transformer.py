"""keras-io's "Text classification with Transformer" (a Transformer block on int token ids).

Origin: https://github.com/keras-team/keras-io/blob/master/examples/nlp/text_classification_with_transformer.py
(Apoorv Nandan, created 2020/05/10, last modified 2024/01/18; the Keras 3 version).

Edits, each marked ``# EDIT``:
- the adoption: ``model.fit(...)`` -> ``KerasModel(model).fit(...)`` with the same arguments
  (``validation_data`` included), and ``evaluate`` on the validation data through the same runner;
- for the test: 96 + 32 generated reviews of random token ids of random lengths (``pad_sequences``
  as published) instead of the IMDB download, ``vocab_size`` 200 (not 20000), ``maxlen`` 16 (not 200),
  ``shuffle=False`` and ``verbose=0``, a seed and ``clear_session``; a function returning what the
  test compares.
"""
import keras
import numpy as np
from keras import layers, ops

from kerastrainer.keras import KerasModel  # EDIT


class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.ffn = keras.Sequential(
            [
                layers.Dense(ff_dim, activation="relu"),
                layers.Dense(embed_dim),
            ]
        )
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs):
        attn_output = self.att(inputs, inputs)
        attn_output = self.dropout1(attn_output)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output)
        return self.layernorm2(out1 + ffn_output)


class TokenAndPositionEmbedding(layers.Layer):
    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        maxlen = ops.shape(x)[-1]
        positions = ops.arange(start=0, stop=maxlen, step=1)
        positions = self.pos_emb(positions)
        x = self.token_emb(x)
        return x + positions


def _fake_imdb(n, vocab_size, seed):  # EDIT: instead of keras.datasets.imdb.load_data()
    """Lists of token ids of random lengths; the label says whether token 7 occurs."""
    rng = np.random.RandomState(seed)
    x = [list(rng.randint(1, vocab_size, rng.randint(4, 24))) for _ in range(n)]
    y = np.array([int(7 in s) for s in x])
    for s, label in zip(x, y):
        if not label and rng.rand() < 0.5:
            s[rng.randint(len(s))] = 7
    return x, np.array([int(7 in s) for s in x])


def program(use_kerastrainer: bool):  # EDIT: a function
    keras.backend.clear_session()  # EDIT
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs
    vocab_size = 200  # EDIT: 20000
    maxlen = 16  # EDIT: 200
    (x_train, y_train), (x_val, y_val) = _fake_imdb(96, vocab_size, 1), _fake_imdb(32, vocab_size, 2)  # EDIT
    x_train = keras.utils.pad_sequences(x_train, maxlen=maxlen)
    x_val = keras.utils.pad_sequences(x_val, maxlen=maxlen)

    embed_dim = 32  # Embedding size for each token
    num_heads = 2  # Number of attention heads
    ff_dim = 32  # Hidden layer size in feed forward network inside transformer

    inputs = layers.Input(shape=(maxlen,))
    embedding_layer = TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)
    x = embedding_layer(inputs)
    transformer_block = TransformerBlock(embed_dim, num_heads, ff_dim)
    x = transformer_block(x)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dropout(0.1)(x)
    x = layers.Dense(20, activation="relu")(x)
    x = layers.Dropout(0.1)(x)
    outputs = layers.Dense(2, activation="softmax")(x)

    model = keras.Model(inputs=inputs, outputs=outputs)

    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    initial = [w.numpy() for w in model.weights]  # EDIT: for the test
    runner = KerasModel(model) if use_kerastrainer else model  # EDIT: the adoption
    history = runner.fit(
        x_train, y_train, batch_size=32, epochs=2, validation_data=(x_val, y_val),
        shuffle=False, verbose=0  # EDIT
    )
    score = runner.evaluate(x_val, y_val, verbose=0)  # EDIT: for the test
    return dict(model=model, initial=initial, history=history.history, evaluate=score)
