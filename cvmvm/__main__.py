import sys

from cvmvm.cli import main

sys.exit(main())
