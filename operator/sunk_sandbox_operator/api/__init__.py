"""The SunkSandboxBinding API: keys, spec and status models, condition reasons, CRD rendering.

Everything here is declarative (no I/O); `from sunk_sandbox_operator import api` gives the
names other layers use.
"""

from .keys import *  # noqa: F401,F403
from .reasons import CONDITION_TYPES, READY_INPUTS, ConditionType  # noqa: F401
from .slurm import *  # noqa: F401,F403
from .scope_spec import *  # noqa: F401,F403
from .spec import *  # noqa: F401,F403
from .status import *  # noqa: F401,F403
