"""Build and install relvm.

The C kernel library in ``kernels/`` is compiled by cffi into the extension ``relvm._kernels``
(see ``kernels/build.py``); the grammar in ``grammar/`` is installed as package data
``relvm/grammar/*.lark``.
"""

from setuptools import find_packages, setup

# relvm.backends.dnnl: oneDNN's CPU (TBB) build; the "onednn" wheel is a SYCL build whose CPU
# engine needs a SYCL CPU device. Its libdnnl also needs libimf/libintlc, which its own metadata
# does not pull in. Wheels exist for x86-64 Linux.
_X86_LINUX = '; platform_system == "Linux" and platform_machine == "x86_64"'
DNNL = ["onednn-cpu-tbb>=2023.2" + _X86_LINUX, "intel-cmplr-lib-rt" + _X86_LINUX]
# relvm.serving (`relvm serve`): an ASGI app (Starlette) under uvicorn; "standard" brings its
# C event loop and HTTP parser (uvloop, httptools), which the server's throughput needs.
SERVE = ["starlette>=0.37", "uvicorn[standard]>=0.29", "prometheus-client>=0.20"]

setup(
    name="relvm",
    version="0.5.0",
    description="A bytecode virtual machine for dynamic-shape neural network inference",
    python_requires=">=3.10",
    packages=find_packages(include=["relvm", "relvm.*"]) + ["relvm.grammar"],
    package_dir={"relvm.grammar": "grammar"},
    package_data={"relvm.grammar": ["*.lark"], "relvm.examples": ["*.relay"],
                  "relvm.backends": ["relvm_vmath.h", "relvm_isa.h"]},
    install_requires=["numpy>=1.24", "cffi>=1.15", "lark>=1.1", "scipy-openblas32>=0.3.27",
                      "pynacl>=1.5"],
    extras_require={
        # onnx and onnxruntime: the ONNX tests (importer, conformance, InferenceSession
        # against ORT) run with the README's test command instead of skipping; so do the
        # oneDNN backend's, with the dnnl extra's wheels (x86-64 Linux only); and the server's,
        # driven by Triton's own client
        "test": ["pytest>=7", "hypothesis>=6.80", "onnx>=1.15", "onnxruntime>=1.17",
                 *DNNL, *SERVE, "tritonclient[http]>=2.40", "httpx>=0.25"],
        "bench": ["onnx>=1.15", "onnxruntime>=1.17", "matplotlib>=3.5", *SERVE],
        "onnx": ["onnx>=1.15"],
        "dnnl": DNNL,
        "serve": SERVE,
        # relvm.serving.ray: the server as a Ray Serve deployment, replicas on many machines
        "ray": [*SERVE, "ray[serve]>=2.9"],
        # tests/onnx/test_hf_exports.py: Hugging Face transformers exported by torch.onnx
        # (legacy and dynamo); the test skips without them, .ci/run installs them
        "hf": ["torch>=2.5", "transformers>=4.45", "onnxscript>=0.1"],
        # benchmarks/zoo only (exporting real networks, and the peers it times); never needed
        # by relvm itself or its tests
        "zoo": ["torch>=2.5", "torchvision>=0.20", "transformers>=4.45", "onnxscript>=0.1",
                "onnx>=1.15", "onnxruntime>=1.17", "openvino>=2024.0"],
    },
    setup_requires=["cffi>=1.15", "scipy-openblas32>=0.3.27"],
    cffi_modules=["kernels/build.py:ffibuilder"],
    entry_points={"console_scripts": ["relvm=relvm.cli:main"]},
    zip_safe=False,
)
