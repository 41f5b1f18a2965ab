"""The E2M1, E8M0 and e4m3 codecs live in qmatmul/formats/fp4.py; the notebooks call them `qmatmul.fp4`."""

from qmatmul.formats.fp4 import *  # noqa: F403
