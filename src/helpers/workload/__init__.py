"""What the course measures: the models, the generated data, the team's model and the saliency task.

- :mod:`~helpers.workload.models` -- ResNet and MobileNetV2 in torchvision and flowvision, weight transfer
- :mod:`~helpers.workload.data` -- a deterministic generated image dataset (no downloads), JPEG pipeline
- :mod:`~helpers.workload.predict` -- one batch-wise prediction and one accuracy for every kind of model
- :mod:`~helpers.workload.training` -- a quick classifier-training recipe so accuracy means something
- :mod:`~helpers.workload.team_model` -- case study 1's original PyTorch model (plain PyTorch on purpose)
- :mod:`~helpers.workload.saliency` -- the deployed forward -> backward -> forward task, eager and nn.Graph
"""
