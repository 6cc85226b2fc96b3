"""The reference of tests/deploy/test_environment_differential.py: a vLLM release's own `envs.py`, loaded alone (it
imports only the standard library at the top), reads each variable it declares, every one set to the same value.

    python envs_reference.py PATH/TO/envs.py VALUE    -> {"NAME": "ok" | "raises ExcName" | "skip ExcName"}
"""

import importlib.util
import json
import os
import sys

path, value = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("served_envs", path)
module = importlib.util.module_from_spec(spec)
sys.modules["served_envs"] = module  # some of its lambdas look the module up there
spec.loader.exec_module(module)
names = sorted(module.environment_variables)
os.environ.update({name: value for name in names})  # all at once, as `specguard config --env` is given them
read = {}
for name in names:
    try:
        getattr(module, name)
        read[name] = "ok"
    except ImportError as exc:  # a lambda importing the rest of vLLM: not this reference's to answer
        read[name] = f"skip {type(exc).__name__}"
    except Exception as exc:  # noqa: BLE001 - what vLLM raises reading the variable is the answer
        read[name] = f"raises {type(exc).__name__}"
print(json.dumps(read))
