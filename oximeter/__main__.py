import sys

from oximeter.cli import main

sys.exit(main())
