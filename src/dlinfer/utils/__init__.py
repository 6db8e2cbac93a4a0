"""Small shared types of dlinfer's interface (:mod:`dlinfer.utils.type_annotation`)."""
