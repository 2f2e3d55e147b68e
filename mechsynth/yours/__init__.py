"""Your model, your checkpoints, your training loop: models from elsewhere (`external`), checkpoints imported
into a run (`importing`; their architecture read off the weights in `architecture`, checkpoints that say what
they are written by `saving`), the Monitor for a loop of yours (`monitor`) and its Trainer callbacks (`callbacks`)."""
