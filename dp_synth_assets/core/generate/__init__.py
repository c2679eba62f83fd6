"""Generation engines: one `fit(...)` and one `sample(...)` per engine; `pgm` is mbi's estimator."""
