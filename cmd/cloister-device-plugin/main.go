// Command cloister-device-plugin is the kubelet device plugin for SGX,
// IBM CryptoExpress and AWS Nitro Enclaves; see internal/deviceplugin.
package main

import (
	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/deviceplugin"
)

func main() {
	startup.Main("cloister-device-plugin", deviceplugin.NewCommand().ExecuteContext)
}
