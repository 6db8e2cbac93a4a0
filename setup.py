"""Build of the optional compiled fast path of the dipu device (metadata: pyproject.toml).

``torch_dipu._fastpath`` (dispatch) and ``torch_dipu._fastalloc`` (the caching allocator's common request) use the
Python C API only (no PyTorch headers), so any C compiler builds them in about a second. ``optional=True``: where no
compiler is found the install goes on and torch_dipu runs its Python path.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("torch_dipu._fastpath", ["src/torch_dipu/_fastpath.c"], optional=True),
    Extension("torch_dipu._fastalloc", ["src/torch_dipu/_fastalloc.c"], optional=True),
])
