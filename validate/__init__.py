"""`validate`: run a chosen policy end to end on real hardware and hold the simulator to it.

    validate calibrate --model DIR --out profile.json          # measure the hardware as ecosim/cost/ needs it
    validate run --winner sweep/winner.json --model DIR --prompts FILE --out RUN
    validate report RUN [--out DIR]                             # the table; comparison.{json,parquet} in RUN or DIR
    validate device-check --device cuda --out DIR               # the GPU half in one command (devicecheck/)

One module per job:

- `clock`: wall time, with the device synchronised on CUDA (and a fake clock for tests).
- `choice`: the policy to validate, from a sweep's winner.json or from flags.
- `live`: a live candidate tree as a one-tree ecosim trace, selected with ecosim's policy functions.
- `decode`: real speculative decoding (draft, select, verify only the selected subtree, accept
  greedily, keep the accepted path in the KV cache) and plain greedy decoding, the reference.
- `calibrate`: microbenchmarks of the model's own verification forwards (forced routing: chosen
  tokens x chosen expert unions) and draft steps, fitted by least squares into a hardware profile;
  a package: `config` (CalibConfig), `design` (the cases), `timing` (running them), `fit`,
  `profile` (the JSON), `host` (memory, CPU name), `pair` (all of it on a loaded pair).
- `bench`: those microbenchmarks on a loaded pair (the routing forced by a router hook).
- `recorded`: the trace a run decodes: recording it, its tree options, prompts and tokens.
- `run_config`: what `validate run` takes, checked before anything is loaded or written.
- `measure`: the whole `validate run`, a function per phase: record a trace on the spot, decode
  with each policy, check losslessness, write the measurements.
- `parts`: what a run has committed (RUN/parts/), so the same command continues it.
- `drift`: a stored profile brought to the run's pace by anchors re-timed between its rounds.
- `devicecheck`: `validate device-check`, a package: environment, targets, plan, phases, graphs,
  summary, check (the phases in order).
- `compare`: the simulator's prediction for the same trace and profile against the measurement;
  every figure it writes is defined in its docstring.
- `report`: the comparison as a table and the lines that say whether the targets are met.
- `cli`: the `validate` command.

Imports flow one way: validate -> tracer -> ecosim.
"""
