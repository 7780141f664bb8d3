"""pyinfra's config file: pyinfra runs it (from the directory it is started in, this
project) before it loads the inventory or connects, for every deploy and inventory.

remedy's guards are installed here, so that none depends on the inventory file:

* a host whose ssh_key is missing or unreadable fails alone, in one line, and is audited
  (``remedy.connect``), also under an inventory that does not call ``checked_hosts``;
* Ctrl-C and SIGTERM stop the run from the first moment, and a stopped run never exits 0
  (pyinfra's own handler exits 0, "Exiting upon user request!", while it prepares);
* what pyinfra prints and logs (``-v``, ``-vv``: each command with its arguments) has
  every secret's value masked (``remedy.console.MaskedLines``).
"""

from remedy.connect import guard as _guard
from remedy.console import mask_streams as _mask_streams
from remedy.lifecycle import process_run as _process_run

_guard()
_process_run()  # the process's run: SIGINT and SIGTERM are its own from now on
_mask_streams("stdout", "stderr")  # -v, -vv: what pyinfra logs, with every secret masked
