"""What a run shows: probing its checkpoints (`timeline`), its stages (`stages`), the run report (`report`,
`plots`, `views`), W&B (`wandb_log`) and a headless browser to look at pages (`browser`)."""
