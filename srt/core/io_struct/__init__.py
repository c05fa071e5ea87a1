"""Typed messages between the processes, one module per receiver (pickled by default, msgpack
selectable; codec.py and ipc.py carry them).

- to_scheduler: the TokenizerManager's requests and control messages.
- to_detokenizer: the scheduler's token ids (batch_output holds the fields shared with the text form).
- to_tokenizer: the detokenizer's text and errors, the scheduler's control replies and gauges.
- to_dp_controller: a replica's load.  to_launcher: a scheduler's start-up report.
"""
