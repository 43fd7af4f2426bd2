"""Executable files: the container format (``format.py``), the metadata schema (``meta.py``),
reading (``loader.py``), writing (``writer.py``) and who is trusted to carry native code
(``trust.py``)."""
