"""tandv_tb: numerics of neural-network training, in TensorBoard."""

import pathlib

from setuptools import find_packages, setup

setup(
    name="tandv_tb",
    version="0.1.0",
    description="Exponent histograms and low-precision numerics of training, in TensorBoard",
    long_description=pathlib.Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tandv_tb", "tandv_tb.*"]),
    package_data={"tandv_tb": ["static/*", "static/**/*", "plugin/*.md"]},
    install_requires=[
        "duckdb>=1.1",
        "google-crc32c>=1.5",
        "numpy>=1.24",
        "ml_dtypes>=0.5",
        "numba>=0.60",
        "pandas>=2.0",
        "protobuf>=4.21",
        "pyarrow>=15",
        "tensorboard>=2.15",
    ],
    extras_require={
        "torch": ["torch>=2.1"],
        "jax": ["jax>=0.4.30", "flax>=0.8", "optax>=0.2"],
        "lightning": ["lightning>=2.0"],
        "transformers": ["transformers>=4.41", "accelerate>=1.1"],
        "test": [
            "pytest>=8",
            "pytest-timeout>=2",
            "hypothesis>=6",
            "ipython>=8",
            "playwright>=1.40",
            "pytorch-lightning>=2.0",
            "ruff>=0.5",
            "tensorboardX>=2.6",
            "werkzeug>=2",
        ],
    },
    entry_points={
        "tensorboard_plugins": ["tandv = tandv_tb.plugin:NumericsLoader"],
        "console_scripts": ["tandv-tb = tandv_tb.diagnosis.cli:main"],
    },
)
