"""Your model, your checkpoints, your training loop: models from elsewhere (`external`), checkpoints imported
into a run (`importing`), the Monitor for a loop of yours (`monitor`) and its Trainer callbacks (`callbacks`)."""
