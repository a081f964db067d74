"""Consumer lag as one model for the exporter, the alerts and the console (sans-IO).

* `compute`: the lag arithmetic (offset lag clamped to the log, time lag from the first
  unconsumed record's own timestamp);
* `model`: the rows one look at lag produces (GroupLag, PartitionLag, TopicPartitionEnds).
"""
