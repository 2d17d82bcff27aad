// The seeds' C++ custom operator `ipowop` (Ben-Nun et al., "For Customizing: New Operator"), as listed there
// with only its base class's namespace changed (deep500:: -> d5::) and the registration line added.
// d5.ops.compile_cpp_op includes <d5/custom_operator.h> (and so <cmath>) and supplies DPOWER:
//
//     op = d5.ops.compile_cpp_op("examples/ipowop.cpp", "ipowop", defines={"DPOWER": 3})

template<typename T>
class ipowop : public d5::CustomOperator {
protected:
    int m_len;
public:
    ipowop(int len) : m_len(len) {}
    virtual ~ipowop() {}

    void forward(const T *input, T *output) {
        #pragma omp parallel for
        for (int i = 0; i < m_len; ++i)
            output[i] = std::pow(input[i], DPOWER);
    }

    void backward(const T *nextop_grad,
                 const T *fwd_input_tensor,
                 const T *fwd_output_tensor,
                 T *input_tensor_grad) {
        #pragma omp parallel for
        for (int i = 0; i < m_len; ++i) {
            input_tensor_grad[i] = nextop_grad[i] * DPOWER *
                std::pow(fwd_input_tensor[i], DPOWER - 1);
        }
    }
};

D5_REGISTER_OP(ipowop)
