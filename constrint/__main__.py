"""`python -m constrint ...` runs the `constrint` command line."""
import sys

from .cli import main

sys.exit(main())
