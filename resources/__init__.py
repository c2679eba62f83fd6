"""dp-synth's Dagster resources: the warehouse (`warehouse.WarehouseResource`) and the privacy
ledger (`ledger.LedgerResource`), each registered under a resource key the host may choose."""
