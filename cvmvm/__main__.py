import sys

from cvmvm.cli.main import main

sys.exit(main())
