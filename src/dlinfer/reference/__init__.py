"""The plain-torch reference kernel of every dlinfer operator (registered with
``dlinfer.registry.registry.register_reference``); they run on any device with the ATen operators they use."""
