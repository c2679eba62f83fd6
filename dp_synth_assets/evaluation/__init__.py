"""Evaluation of a synthetic table, without Dagster.

- `fidelity`: the TVD, the public figures against the noisy measurements (`fidelity_summary`,
  `MarginalCounter`) and the owner-only 2-way TVDs against source rows.
- `queries`: the 3-way range-query error; `ml`: ML efficiency; `plots`: the report's figures.
- `report`: the owner-only utility report, its JSON and HTML, and the owner-only file writer.
- `tables`: the encoded tables they all take.

Submodules are imported on demand: importing this package loads neither sklearn nor matplotlib.
"""
