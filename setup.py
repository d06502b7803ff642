"""kerastrainer: tensorpack-style training for TensorFlow 2 and Keras 3."""
import os

from setuptools import find_packages, setup

here = os.path.dirname(os.path.abspath(__file__))
about = {}
with open(os.path.join(here, "kerastrainer", "_version.py")) as f:
    exec(f.read(), about)

# The data side (kerastrainer.dataflow) needs only these; TensorFlow is separate
# so that data-only users and worker processes never pay for it.
data_requires = ["numpy>=1.23", "pyzmq>=25", "msgpack>=1.0", "tqdm>=4.60", "tabulate>=0.9", "psutil>=5.9"]
tf_requires = ["tensorflow-cpu==2.21.*; platform_machine=='x86_64'",
               "tensorflow==2.21.*; platform_machine!='x86_64'",
               "keras>=3.15,<3.16", "tensorboard>=2.20"]

extras = {
    "image": ["opencv-python-headless>=4.8"],
    "lmdb": ["lmdb>=1.4"],
    "test": ["pytest>=7", "scikit-learn>=1.3"],
}
extras["all"] = sorted({r for k in ("image", "lmdb") for r in extras[k]} | {"scikit-learn>=1.3"})

setup(
    name="kerastrainer",
    version=about["__version__"],
    description="tensorpack-style trainers, DataFlows and callbacks for TensorFlow 2 and Keras 3",
    long_description=open(os.path.join(here, "README.md")).read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["kerastrainer", "kerastrainer.*"]),
    python_requires=">=3.10",
    install_requires=data_requires + tf_requires,
    extras_require=extras,
    entry_points={"console_scripts": ["kerastrainer-run=kerastrainer.run:main"]},
    classifiers=["Programming Language :: Python :: 3", "License :: OSI Approved :: Apache Software License"],
)
