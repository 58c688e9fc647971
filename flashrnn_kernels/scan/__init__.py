"""Linear recurrences h_t = a_t h_{t-1} + b_t by a single-pass chunked scan kernel, and minGRU / minLSTM on it
with the gates computed inside the scan. CuPy is imported only when a kernel is launched."""
from .api import linear_scan, min_gru, min_gru_scan, min_lstm, min_lstm_scan
from .nn import MinGRU, MinLSTM
from .plan import ScanPlan, plan
from .problem import ScanProblem

__all__ = ["MinGRU", "MinLSTM", "ScanPlan", "ScanProblem", "linear_scan", "min_gru", "min_gru_scan", "min_lstm",
           "min_lstm_scan", "plan"]
