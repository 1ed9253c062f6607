package reduce

import (
	"encoding/binary"
	"math"
	"math/big"

	"github.com/flexlink/flexlink/dtype"
)

// The oracle: an independent reference that decodes elements to exact
// values (big.Int for integers, float64 or big.Float for floats), computes
// exactly, and rounds once to the dtype. It shares no code with the package
// except dtype's half-float widening, which dtype's tests check exhaustively
// against a field-by-field decoder.
//
// Rounding exact → float64 → dtype is a double rounding, but float64 has at
// least twice the precision of float32, float16 and bfloat16 plus two bits,
// which makes it innocuous for +, ×, ÷ (Figueroa, "When is double rounding
// innocuous?", 1995): the oracle is correctly rounded, no tolerance needed.

// elem reads element i of b as raw bits.
func elem(b []byte, dt dtype.DType, i int) uint64 {
	ne := binary.NativeEndian
	switch dt.Size() {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(ne.Uint16(b[2*i:]))
	case 4:
		return uint64(ne.Uint32(b[4*i:]))
	}
	return ne.Uint64(b[8*i:])
}

func setElem(b []byte, dt dtype.DType, i int, v uint64) {
	ne := binary.NativeEndian
	switch dt.Size() {
	case 1:
		b[i] = byte(v)
	case 2:
		ne.PutUint16(b[2*i:], uint16(v))
	case 4:
		ne.PutUint32(b[4*i:], uint32(v))
	default:
		ne.PutUint64(b[8*i:], v)
	}
}

// intValue decodes integer bits as a signed or unsigned big.Int.
func intValue(dt dtype.DType, bits uint64) *big.Int {
	switch dt {
	case dtype.Int8:
		return big.NewInt(int64(int8(bits)))
	case dtype.Int32:
		return big.NewInt(int64(int32(bits)))
	case dtype.Int64:
		return big.NewInt(int64(bits))
	}
	return new(big.Int).SetUint64(bits)
}

// wrap reduces an exact integer modulo 2^(8·size), as two's complement bits.
func wrap(dt dtype.DType, v *big.Int) uint64 {
	m := new(big.Int).Lsh(big.NewInt(1), uint(8*dt.Size()))
	r := new(big.Int).Mod(v, m) // Mod is Euclidean: r ≥ 0
	return r.Uint64()
}

// oracleInt is the expected bits of a op b for integers.
func oracleInt(dt dtype.DType, op dtype.Op, a, b uint64) uint64 {
	x, y := intValue(dt, a), intValue(dt, b)
	switch op {
	case dtype.Prod:
		return wrap(dt, new(big.Int).Mul(x, y))
	case dtype.Min:
		if y.Cmp(x) < 0 {
			return b
		}
		return a
	case dtype.Max:
		if y.Cmp(x) > 0 {
			return b
		}
		return a
	}
	return wrap(dt, new(big.Int).Add(x, y))
}

// floatValue decodes float bits exactly.
func floatValue(dt dtype.DType, bits uint64) float64 {
	switch dt {
	case dtype.Float16:
		return float64(dtype.Float16ToFloat32(uint16(bits)))
	case dtype.BFloat16:
		return float64(dtype.BFloat16ToFloat32(uint16(bits)))
	case dtype.Float32:
		return float64(math.Float32frombits(uint32(bits)))
	case dtype.Float8E4M3, dtype.Float8E5M2:
		return f8Value(dt, uint8(bits))
	}
	return math.Float64frombits(bits)
}

// f8Value decodes float8 bits from their fields (independent of dtype's
// conversions).
func f8Value(dt dtype.DType, b uint8) float64 {
	manBits, bias := 3, 7
	if dt == dtype.Float8E5M2 {
		manBits, bias = 2, 15
	}
	exp, man := int(b&0x7f)>>manBits, int(b)&(1<<manBits-1)
	var v float64
	switch {
	case dt == dtype.Float8E4M3 && b&0x7f == 0x7f, dt == dtype.Float8E5M2 && b&0x7f > 0x7c:
		return math.NaN()
	case dt == dtype.Float8E5M2 && b&0x7f == 0x7c:
		v = math.Inf(1)
	case exp == 0:
		v = math.Ldexp(float64(man), 1-bias-manBits)
	default:
		v = math.Ldexp(float64(man|1<<manBits), exp-bias-manBits)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return v
}

// saturate is what the float8 types store for v: ±Inf (and anything past
// the largest finite value) becomes the largest finite value of its sign,
// as NCCL's satfinite conversions do. Other types keep v.
func saturate(dt dtype.DType, v float64) float64 {
	if !dt.IsFloat8() || math.IsNaN(v) {
		return v
	}
	if _, _, maxFinite := format(dt); math.Abs(v) > maxFinite {
		return math.Copysign(maxFinite, v)
	}
	return v
}

// format gives the stored mantissa bits, the smallest normal exponent and
// the largest finite value of a float dtype.
func format(dt dtype.DType) (manBits, minExp int, maxFinite float64) {
	switch dt {
	case dtype.Float16:
		return 10, -14, 65504
	case dtype.BFloat16:
		return 7, -126, float64(math.Float32frombits(0x7f7f0000))
	case dtype.Float32:
		return 23, -126, math.MaxFloat32
	case dtype.Float8E4M3:
		return 3, -6, 448
	case dtype.Float8E5M2:
		return 2, -14, 57344
	}
	return 52, -1022, math.MaxFloat64
}

// roundTo rounds a float64 to the nearest value of dt (ties to even),
// computed from the format's parameters with math.RoundToEven.
func roundTo(dt dtype.DType, v float64) float64 {
	if dt == dtype.Float64 || v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return saturate(dt, v)
	}
	manBits, minExp, maxFinite := format(dt)
	a := math.Abs(v)
	_, e := math.Frexp(a) // a = f·2^e, f in [0.5, 1)
	e = max(e-1, minExp)
	ulp := math.Ldexp(1, e-manBits)
	r := math.RoundToEven(a/ulp) * ulp
	if r > maxFinite {
		r = math.Inf(1)
	}
	return saturate(dt, math.Copysign(r, v))
}

// exactOp computes a op b for finite a, b exactly and rounds it to float64.
func exactOp(op dtype.Op, a, b float64) float64 {
	x := new(big.Float).SetPrec(4096).SetFloat64(a)
	y := new(big.Float).SetPrec(4096).SetFloat64(b)
	z := new(big.Float).SetPrec(4096)
	if op == dtype.Prod {
		z.Mul(x, y)
	} else {
		z.Add(x, y)
	}
	f, _ := z.Float64()
	switch { // IEEE signs of zero: x+(-x) = +0, -0 + -0 = -0, products xor
	case op == dtype.Prod && f == 0:
		return signedZero(math.Signbit(a) != math.Signbit(b))
	case op != dtype.Prod && z.Sign() == 0:
		return signedZero(math.Signbit(a) && math.Signbit(b))
	}
	return f
}

// oracleFloat is the expected value of a op b for float dtypes.
func oracleFloat(dt dtype.DType, op dtype.Op, a, b float64) float64 {
	return saturate(dt, oracleFloatExact(dt, op, a, b))
}

func oracleFloatExact(dt dtype.DType, op dtype.Op, a, b float64) float64 {
	switch {
	case math.IsNaN(a) || math.IsNaN(b):
		return math.NaN()
	case op == dtype.Min || op == dtype.Max:
		less := a < b
		if op == dtype.Max {
			less = a > b
		}
		switch {
		case less:
			return a
		case a != b:
			return b
		case a == 0: // ±0 against ±0
			neg := math.Signbit(a) || math.Signbit(b)
			if op == dtype.Max {
				neg = math.Signbit(a) && math.Signbit(b)
			}
			return signedZero(neg)
		}
		return a
	case math.IsInf(a, 0) || math.IsInf(b, 0):
		// Results with an infinite input are infinite or NaN, so
		// float64 arithmetic gives them exactly.
		if op == dtype.Prod {
			return a * b
		}
		return a + b
	}
	return roundTo(dt, exactOp(op, a, b))
}

// oracleAvg is the expected value of x/n for Finish.
func oracleAvgFloat(dt dtype.DType, x float64, n int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return saturate(dt, x) // n > 0 keeps NaN, ±Inf and ±0
	}
	q := new(big.Float).SetPrec(256).Quo(new(big.Float).SetFloat64(x), new(big.Float).SetInt64(int64(n)))
	f, _ := q.Float64()
	return roundTo(dt, f)
}

func oracleAvgInt(dt dtype.DType, bits uint64, n int) uint64 {
	return wrap(dt, new(big.Int).Quo(intValue(dt, bits), big.NewInt(int64(n)))) // Quo truncates
}

func signedZero(neg bool) float64 {
	if neg {
		return math.Copysign(0, -1)
	}
	return 0
}
