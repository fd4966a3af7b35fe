"""Draft kinds: what expands the candidate trees a trace records. `registry` lists them; one module
each (`model`, `early_exit`, `mtp`, `eagle3`); `heads` holds what MTP and EAGLE-3 share;
`cost` writes the manifest's `draft` object."""
