"""Fused recurrent cells."""

FAMILY = "rnn"

# name | packets | tags | backward function | summary
TABLE = """
diopiLstmCell | _thnn_fused_lstm_cell |
diopiLstmCellBackward | _thnn_fused_lstm_cell_backward_impl | backward
diopiGruCell | _thnn_fused_gru_cell |
diopiGruCellBackward | _thnn_fused_gru_cell_backward | backward
"""
