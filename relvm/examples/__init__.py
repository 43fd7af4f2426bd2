"""Example models shipped with relvm: text IR plus deterministic weights.

>>> from relvm import examples
>>> text = examples.text("mlp")
>>> params = examples.params("mlp")
>>> sorted(params)[:2]
['b1', 'b2']
"""

from __future__ import annotations

from importlib import resources

import numpy as np

#: Weight shapes of each example's named parameters.
_PARAM_SHAPES = {
    "mlp": {"w1": (512, 784), "b1": (512,), "w2": (512, 512), "b2": (512,),
            "w3": (10, 512), "b3": (10,)},
    "convnet": {"w1": (16, 3, 3, 3), "b1": (16,), "w2": (32, 16, 3, 3), "b2": (32,),
                "w3": (10, 32), "b3": (10,)},
}

NAMES = tuple(_PARAM_SHAPES)


def text(name: str) -> str:
    """The Relay text of example ``name``."""
    if name not in _PARAM_SHAPES:
        raise KeyError(f"no example {name!r}; examples: {', '.join(NAMES)}")
    return resources.files(__package__).joinpath(f"{name}.relay").read_text()


def params(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic float32 weights for example ``name`` (He-scaled normal, seeded)."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, shape in _PARAM_SHAPES[name].items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        scale = np.sqrt(2.0 / fan_in) if len(shape) > 1 else 0.1
        out[key] = (rng.standard_normal(shape) * scale).astype(np.float32)
    return out
