#!/bin/bash
set -euo pipefail
python3 -c 'import json, yaml; json.dump(yaml.safe_load(open("/app/config.yaml")), open("/app/config.json", "w"), indent=2, sort_keys=True)'
