"""verl's own start-up checks, run on CPU for the verl the spec declares (`topl check --deep`, and
`topl launch` before a remote submission): `deep` (this side) hands the rendered command to a child
Python whose `verl` is the declared release (`releases`), where `verl_side` composes it with that
verl's Hydra config, runs its `validate_config`, builds every config dataclass the workers build,
looks the algorithm names up in verl's registries and runs `mirror`: the checks that need a process
group or a device, over verl's composed config. The fast rules (contract/verl_layout.py) run the same
`mirror` functions over the command topl renders, without verl.
"""
