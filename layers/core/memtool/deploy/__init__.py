"""Deploy tooling: reads template.yaml as CloudFormation would deploy it (not shipped in the core layer)."""
