"""Runbooks: load them, validate them against ``runbooks/schema.json``, and
cross-check them with the operations, the run's step list and the deploys.

* ``files``: find and parse ``runbooks/<id>-<slug>.yaml``, keeping each value's line;
* ``schema``: one runbook against the schema, plus what a schema cannot say
  of one file (duplicate keys, the id is the file name's prefix, unique step ids);
* ``memory_gate``: a runbook that restarts the server carries the memory gate;
* ``operation_index``: every operation a runbook names is an ``@operation``;
* ``flow``: each step of the run's step list (``remedy.core.run.steps``) names such an
  operation, carries an issue and is named by a runbook; a flow runbook lists
  the run's steps in the run's order;
* ``deploys``: a runbook's deploy exists, and a deploy runs the step list;
* ``check``: all of it for a project (``remedy runbooks check``).

Every problem names the file, the line, the JSON path (or the operation) and
what is wrong. It reads files and imports the operations, so it lives with the
adapters, not in the pure core: nothing here connects anywhere or runs a deploy.
"""

from remedy.runbooks.check import CheckReport, check_project
from remedy.runbooks.deploys import DEPLOYS_DIR
from remedy.runbooks.files import RUNBOOKS_DIR, Runbook, discover, find_runbook, load_runbook
from remedy.runbooks.memory_gate import MEMORY_GATE, RESTARTING_OPERATIONS
from remedy.runbooks.operation_index import OPERATIONS_PACKAGE
from remedy.runbooks.problems import Problem, RunbookInvalid, RunbookSyntaxError
from remedy.runbooks.schema import (
    issue_ref_is_valid,
    load_schema,
    load_valid_runbook,
    validate_runbook,
)

__all__ = [
    "DEPLOYS_DIR",
    "MEMORY_GATE",
    "OPERATIONS_PACKAGE",
    "RESTARTING_OPERATIONS",
    "RUNBOOKS_DIR",
    "CheckReport",
    "Problem",
    "Runbook",
    "RunbookInvalid",
    "RunbookSyntaxError",
    "check_project",
    "discover",
    "find_runbook",
    "issue_ref_is_valid",
    "load_runbook",
    "load_schema",
    "load_valid_runbook",
    "validate_runbook",
]
