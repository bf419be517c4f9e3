"""The hook command that `hook AGENT --print-settings` registered before 0.7, kept so that the settings files
written then keep working: it runs the fast client, toolreplay/hooks/client.py, with the same arguments.

    python3 -S .../toolreplay/cli/hook_client.py AGENT --policy POLICY --records DIR [--redact-key FILE]
"""

import sys

if __name__ == "__main__":
    # As a script, Python put this file's folder first on the path: the folder holding the package goes there.
    _HERE = __file__ if __file__.startswith("/") else __import__("posix").getcwd() + "/" + __file__
    sys.path[0] = _HERE.rsplit("/", 3)[0]
    from toolreplay.hooks.client import run

    run(sys.argv[1:])
