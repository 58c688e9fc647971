"""`python -m hwmodels` runs the command line."""
import sys

from .cli import main

sys.exit(main())
