# setup.py writes _build_info.py at build time; this stub lets mypy check _compat.py
# in a checkout that has not been built.
TORCH_VERSION: str
