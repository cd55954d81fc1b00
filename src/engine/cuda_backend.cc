// The cuda backend; see engine/cuda_backend.h (being written).
