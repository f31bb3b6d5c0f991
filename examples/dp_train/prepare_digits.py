#!/usr/bin/env python3
"""Convert scikit-learn's bundled 8x8 handwritten digits into MNIST-format IDX files, once.

The digits set (1797 images, 8x8 pixels, values 0..16) ships inside scikit-learn, so nothing is downloaded. Pixels
are rescaled to 0..255 and the set is split into train/test with a fixed seed. The files get MNIST's names so that
dp_train reads them exactly like MNIST:

    train-images-idx3-ubyte  train-labels-idx1-ubyte  t10k-images-idx3-ubyte  t10k-labels-idx1-ubyte

Usage: python examples/dp_train/prepare_digits.py [--out DIR] [--seed 0] [--test-fraction 0.2]
Default DIR: $XDG_CACHE_HOME/pyvgpu/digits (~/.cache/pyvgpu/digits), which dp_train reads when --data is not given.
Prints the directory. Existing files made with the same seed and split are kept.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from pathlib import Path

NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pyvgpu" / "digits"


def _idx3(images) -> bytes:
    n, rows, cols = images.shape
    return struct.pack(">IIII", 0x00000803, n, rows, cols) + images.astype("uint8").tobytes()


def _idx1(labels) -> bytes:
    return struct.pack(">II", 0x00000801, len(labels)) + labels.astype("uint8").tobytes()


def prepare(out: str | os.PathLike | None = None, seed: int = 0, test_fraction: float = 0.2) -> Path:
    """Write the IDX files into `out` (default: the cache dir) unless already there; return the directory."""
    out = Path(out) if out else default_dir()
    stamp = {"source": "sklearn.datasets.load_digits", "seed": seed, "test_fraction": test_fraction, "version": 1}
    meta = out / "digits.json"
    if all((out / n).is_file() for n in NAMES) and meta.is_file():
        try:
            if json.loads(meta.read_text()) == stamp:
                return out
        except ValueError:
            pass
    import numpy as np
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.rint(d.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)  # (1797, 8, 8)
    labels = d.target.astype(np.uint8)
    perm = np.random.RandomState(seed).permutation(len(labels))
    n_test = int(round(len(labels) * test_fraction))
    test, train = perm[:n_test], perm[n_test:]
    out.mkdir(parents=True, exist_ok=True)
    blobs = {NAMES[0]: _idx3(images[train]), NAMES[1]: _idx1(labels[train]),
             NAMES[2]: _idx3(images[test]), NAMES[3]: _idx1(labels[test])}
    for name, blob in blobs.items():  # write-then-rename: concurrent preparers never see half a file
        tmp = out / f".{name}.{os.getpid()}.tmp"
        tmp.write_bytes(blob)
        os.replace(tmp, out / name)
    tmp = out / f".digits.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(stamp))
    os.replace(tmp, meta)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="output directory (default: %(default)s)", default=str(default_dir()))
    ap.add_argument("--seed", type=int, default=0, help="seed of the train/test split")
    ap.add_argument("--test-fraction", type=float, default=0.2)
    args = ap.parse_args(argv)
    print(prepare(args.out, args.seed, args.test_fraction))
    return 0


if __name__ == "__main__":
    sys.exit(main())
