package native

/*
#include "backend.h"
*/
import "C"

// Op names an operation of a backend's op table (backend_ops.h's vd_op).
// A backend may leave any of them out: Supports tells, and a Stream runs
// the ones left out on the CPU backend (fallback.go).
type Op int

// The operations, in the table's order.
const (
	OpLinear           Op = C.VD_OP_LINEAR
	OpLinearRows       Op = C.VD_OP_LINEAR_ROWS
	OpSparseMLP        Op = C.VD_OP_SPARSE_MLP
	OpRMSNorm          Op = C.VD_OP_RMSNORM
	OpRowRMS           Op = C.VD_OP_ROW_RMS
	OpScaleRows        Op = C.VD_OP_SCALE_ROWS
	OpMulRows          Op = C.VD_OP_MUL_ROWS
	OpSparseGeluMul    Op = C.VD_OP_SPARSE_GELU_MUL
	OpEW               Op = C.VD_OP_EW
	OpRoPE             Op = C.VD_OP_ROPE
	OpAltUpPredict     Op = C.VD_OP_ALTUP_PREDICT
	OpAltUpCorrect     Op = C.VD_OP_ALTUP_CORRECT
	OpAttention        Op = C.VD_OP_ATTENTION
	OpEmbed            Op = C.VD_OP_EMBED
	OpGather           Op = C.VD_OP_GATHER
	OpScatter          Op = C.VD_OP_SCATTER
	OpCopy2D           Op = C.VD_OP_COPY2D
	OpLogSumExp        Op = C.VD_OP_LOGSUMEXP
	OpArgmax           Op = C.VD_OP_ARGMAX
	OpSelect           Op = C.VD_OP_SELECT
	OpSample           Op = C.VD_OP_SAMPLE
	OpNormAdd          Op = C.VD_OP_NORM_ADD
	OpRouter           Op = C.VD_OP_ROUTER
	OpNormRoPE         Op = C.VD_OP_NORM_ROPE
	OpRouterCoef       Op = C.VD_OP_ROUTER_COEF
	OpGrammarBind      Op = C.VD_OP_GRAMMAR_BIND
	OpGrammarFree      Op = C.VD_OP_GRAMMAR_FREE
	OpCatalogInit      Op = C.VD_OP_CATALOG_INIT
	OpCatalogStep      Op = C.VD_OP_CATALOG_STEP
	OpPointwise        Op = C.VD_OP_POINTWISE
	OpConv2D           Op = C.VD_OP_CONV2D
	OpDWConv2D         Op = C.VD_OP_DWCONV2D
	OpNormAct          Op = C.VD_OP_NORM_ACT
	OpAvgPool2D        Op = C.VD_OP_AVGPOOL2D
	OpUpsampleConcat   Op = C.VD_OP_UPSAMPLE_CONCAT
	OpTranspose        Op = C.VD_OP_TRANSPOSE
	OpMQA              Op = C.VD_OP_MQA
	OpIm2Col           Op = C.VD_OP_IM2COL
	OpCumGroupNormReLU Op = C.VD_OP_CUM_GROUP_NORM_RELU
	OpLocalAttention   Op = C.VD_OP_LOCAL_ATTENTION
	OpDWConvCausal     Op = C.VD_OP_DWCONV_CAUSAL
	OpGLU              Op = C.VD_OP_GLU
	OpSiLU             Op = C.VD_OP_SILU
	OpClip             Op = C.VD_OP_CLIP
	OpLoopRows         Op = C.VD_OP_LOOP_ROWS
	OpLoopEmit         Op = C.VD_OP_LOOP_EMIT
	OpAltUpPredictStep Op = C.VD_OP_ALTUP_PREDICT_STEP
	OpAltUpCorrectStep Op = C.VD_OP_ALTUP_CORRECT_STEP
	OpNormAddMore      Op = C.VD_OP_NORM_ADD_MORE
	OpNormRoPEs        Op = C.VD_OP_NORM_ROPES
	OpClamp            Op = C.VD_OP_CLAMP
	OpLinears          Op = C.VD_OP_LINEARS
	OpPrefetch         Op = C.VD_OP_PREFETCH
	OpTowerLinear      Op = C.VD_OP_TOWER_LINEAR

	opCount = C.VD_OP_COUNT
)

var opNames = [opCount]string{
	"linear",
	"linear_rows",
	"sparse_mlp",
	"rmsnorm",
	"row_rms",
	"scale_rows",
	"mul_rows",
	"sparse_gelu_mul",
	"ew",
	"rope",
	"altup_predict",
	"altup_correct",
	"attention",
	"embed",
	"gather",
	"scatter",
	"copy2d",
	"logsumexp",
	"argmax",
	"select",
	"sample",
	"norm_add",
	"router",
	"norm_rope",
	"router_coef",
	"grammar_bind",
	"grammar_free",
	"catalog_init",
	"catalog_step",
	"pointwise",
	"conv2d",
	"dwconv2d",
	"norm_act",
	"avgpool2d",
	"upsample_concat",
	"transpose",
	"mqa",
	"im2col",
	"cum_group_norm_relu",
	"local_attention",
	"dwconv_causal",
	"glu",
	"silu",
	"clip",
	"loop_rows",
	"loop_emit",
	"altup_predict_step",
	"altup_correct_step",
	"norm_add_more",
	"norm_ropes",
	"clamp",
	"linears",
	"prefetch",
	"tower_linear",
}

// String is the operation's name in backend.h.
func (o Op) String() string {
	if o >= 0 && o < opCount {
		return opNames[o]
	}
	return "op(" + itoa(int(o)) + ")"
}

// requiredNames are the entries of the table's device, buffer and stream
// parts, in order (vd_required_missing's indices, from 1).
var requiredNames = [...]string{
	"info",
	"limits",
	"alloc",
	"release",
	"bind",
	"unbind",
	"stream_new",
	"stream_free",
	"upload",
	"download",
	"copy",
	"sync",
	"graph_begin",
	"graph_end",
	"graph_run",
	"graph_free",
	"loop_begin",
	"loop_while",
}

// Supports reports whether the backend runs op itself; a Stream runs the
// others on the CPU backend, copying their tensors to host memory and
// back.
func (b *Backend) Supports(op Op) bool { return C.vd_supports(b.t, C.int(op)) != 0 }

// Unsupported lists the operations the backend leaves to the CPU backend.
func (b *Backend) Unsupported() []Op {
	var l []Op
	for op := Op(0); op < opCount; op++ {
		if !b.Supports(op) {
			l = append(l, op)
		}
	}
	return l
}
