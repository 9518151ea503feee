/* cpu_table_impl.h: the kernel table of one SIMD level. */
const vk_ops VK_ISA(vk_ops) = {
	.linear = VK_ISA(linear),
	.attention = VK_ISA(attention),
	.rmsnorm = VK_ISA(rmsnorm),
	.row_rms = VK_ISA(row_rms),
	.scale_rows = VK_ISA(scale_rows),
	.mul_rows = VK_ISA(mul_rows),
	.sparse_gelu_mul = VK_ISA(sparse_gelu_mul),
	.logsumexp = VK_ISA(logsumexp),
	.argmax = VK_ISA(argmax),
	.rope = VK_ISA(rope),
	.altup_predict = VK_ISA(altup_predict),
	.altup_correct = VK_ISA(altup_correct),
	.ew = VK_ISA(ew),
	.bf16_to_f32 = VK_ISA(bf16_to_f32),
};
