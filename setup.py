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
# One TensorFlow package: `tensorflow` runs on CPU and on GPUs. The CUDA libraries come
# with the [cuda] extra; [cpu] is the smaller CPU-only wheel (see README, "Installing").
tf_requires = ["tensorflow==2.21.*", "keras>=3.15,<3.16", "tensorboard>=2.20"]

extras = {
    "image": ["opencv-python-headless>=4.8"],
    "lmdb": ["lmdb>=1.4"],
    # pytest-timeout: a test that hangs fails with every thread's stack (pyproject.toml), never stalls CI
    "test": ["pytest>=7", "pytest-timeout>=2.1", "scikit-learn>=1.3",
             # the oracle of tests/differential/ (a subprocess with TF_USE_LEGACY_KERAS=1), never the library's
             "tensorpack==0.11", "tf-keras==2.21.0", "msgpack-numpy>=0.4", "termcolor>=1.1", "six",
             # tests/tensorpack_examples/FasterRCNN (the port's COCO evaluation and polygon masks)
             "pycocotools>=2.0"],
    "plot": ["matplotlib>=3.7"],
    "hdf5": ["h5py>=3.8"],
    "mat": ["scipy>=1.10"],  # MATLAB .mat datasets (SVHNDigit, Caltech101Silhouettes)
    "cuda": ["tensorflow[and-cuda]==2.21.*"],
    "cpu": ["tensorflow-cpu==2.21.*"],
}
extras["all"] = sorted({r for k in ("image", "lmdb", "plot", "hdf5", "mat") for r in extras[k]} | {"scikit-learn>=1.3"})

setup(
    name="kerastrainer",
    version=about["__version__"],
    description="tensorpack-style trainers, DataFlows and callbacks for TensorFlow 2 and Keras 3",
    long_description=open(os.path.join(here, "README.md")).read(),
    long_description_content_type="text/markdown",
    url="https://github.com/kerastrainer/kerastrainer",
    project_urls={
        "Documentation": "https://github.com/kerastrainer/kerastrainer/tree/main/docs",
        "Examples": "https://github.com/kerastrainer/kerastrainer/tree/main/examples",
        "Source": "https://github.com/kerastrainer/kerastrainer",
    },
    license="Apache-2.0",
    license_files=["LICENSE"],
    packages=find_packages(include=["kerastrainer", "kerastrainer.*"]),
    package_data={"kerastrainer": ["py.typed"]},
    include_package_data=True,
    python_requires=">=3.10",
    install_requires=data_requires + tf_requires,
    extras_require=extras,
    entry_points={"console_scripts": ["kerastrainer-run=kerastrainer.run:main",
                                      "kerastrainer-plot=kerastrainer.plot:main"]},
    classifiers=["Programming Language :: Python :: 3", "License :: OSI Approved :: Apache Software License"],
)
